from collections import defaultdict

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from budgets.permissions import is_oncall, managed_unit_ids
from config.converters import ID_REGEX
from scheduler.agents import Heartbeat, ProcessReport, agent_heartbeat
from scheduler.api.authentication import AgentTokenAuthentication, IsAgent
from scheduler.api.serializers import (
    CancelSerializer,
    HeartbeatSerializer,
    JobDetailSerializer,
    JobSerializer,
    JobSubmitSerializer,
    checked_entries,
    job_request,
)
from scheduler.choices import JobState
from scheduler.forms import STATES, TIME_HELP, HistoryForm, UsageForm, form_errors
from scheduler.models import Job, JobEvent
from scheduler.selectors import UnknownName, job_history, live_gpu_ids
from scheduler.services import JobError, SubmitRefused, can_cancel, job_cancel, job_submit
from topology.choices import Executor


def command_visibility(user):
    """Who sees a job's command and output: its owner, managers of its project, on-call, admins."""
    if user.is_superuser or is_oncall(user):
        return lambda job: True
    managed = managed_unit_ids(user)
    return lambda job: job.user_id == user.pk or job.project_id in managed


def job_context(jobs, user) -> dict:
    """GPU ids and in-project positions for a page of jobs: two queries, whatever the page size."""
    jobs = list(jobs)
    gpu_ids = live_gpu_ids(job.pk for job in jobs if job.is_live)
    positions = {}
    pending_projects = {(job.cluster_id, job.project_id) for job in jobs if job.state == JobState.PENDING}
    if pending_projects:
        queued = Job.objects.pending().filter(
            project_id__in={p for _, p in pending_projects}, queue_position__isnull=False
        ).order_by("queue_position").values_list("pk", "cluster_id", "project_id")
        counters = defaultdict(int)
        for pk, cluster_id, project_id in queued:
            counters[(cluster_id, project_id)] += 1
            positions[pk] = counters[(cluster_id, project_id)]
    return {"gpu_ids": gpu_ids, "project_positions": positions, "command_visible": command_visibility(user)}


@extend_schema(tags=["jobs"])
class JobViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Submit, list, read and cancel jobs."""

    queryset = Job.objects.select_related("cluster", "project__parent", "user")
    lookup_value_regex = ID_REGEX

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        if self.action == "retrieve":
            return JobDetailSerializer
        if self.action == "cancel":
            return CancelSerializer
        return JobSerializer

    def get_object(self):
        job = self.get_queryset().filter(pk=int(self.kwargs["pk"])).first()
        if job is None:
            raise NotFound(f"no job {self.kwargs['pk']}")
        return job

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "retrieve":
            return queryset.prefetch_related(Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")))
        if self.action != "list":
            return queryset
        form = HistoryForm(self.request.query_params)
        if not form.is_valid():
            raise ValidationError(form_errors(form))
        try:
            queryset = job_history(form.cleaned_data, user=self.request.user)
        except UnknownName as error:
            raise ValidationError(error.errors)
        if form.cleaned_data["state"] == [JobState.PENDING]:
            return queryset.order_by("cluster__name", "queue_position", "pk")
        return queryset

    @extend_schema(
        parameters=[
            OpenApiParameter("state", description=f"comma-separated states: {', '.join(STATES)}; another is a 400 "
                                                  "naming them"),
            OpenApiParameter("since", description=f"jobs not ended before this: {TIME_HELP}"),
            OpenApiParameter("until", description="jobs submitted before this"),
            OpenApiParameter("project"), OpenApiParameter("cluster"), OpenApiParameter("user"),
            OpenApiParameter("unit", description="jobs of every project in this unit"),
            OpenApiParameter("mine", description="1: only my jobs"),
            OpenApiParameter("my_projects", description="1: only jobs of projects I belong to"),
        ]
    )
    def list(self, request, *args, **kwargs):
        """Jobs, newest first (pending ones in queue order when `state=pending`): the queue and the history."""
        page = self.paginate_queryset(self.get_queryset())
        serializer = JobSerializer(page, many=True, context=job_context(page, request.user))
        return self.get_paginated_response(serializer.data)

    def retrieve(self, request, *args, **kwargs):
        job = self.get_object()
        return Response(JobDetailSerializer(job, context=job_context([job], request.user)).data)

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    def create(self, request, *args, **kwargs):
        try:
            job = job_submit(user=request.user, request=job_request(request.data))
        except JobError as error:
            raise ValidationError(error.errors)
        except SubmitRefused as error:
            raise PermissionDenied(str(error))
        job = self.get_queryset().get(pk=job.pk)
        return Response(JobDetailSerializer(job, context=job_context([job], request.user)).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("rank", int, description="only this rank"),
                    OpenApiParameter("run", int, description="this run (0 is the first; default: the current one)")],
        responses={200: dict},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """Every rank's output tail of the job's current run (or `run`): `allot logs`. Shown to those who see
        the command."""
        job = self.get_object()
        if not command_visibility(request.user)(job):
            raise PermissionDenied(f"job {job.pk}'s output is shown to {job.user.username}, managers of "
                                   f"{job.project.name}, on-call and admins")
        numbers = {}
        for name in ("rank", "run"):
            value = request.query_params.get(name)
            if value not in (None, ""):
                if not value.isdigit() or int(value) > 2**31 - 1:
                    raise ValidationError({name: [f"a whole number from 0, got {value!r}"]})
                numbers[name] = int(value)
        run = numbers.get("run", job.restarts)
        processes = job.processes.filter(run=run).select_related("host").order_by("rank")
        if "rank" in numbers:
            processes = processes.filter(rank=numbers["rank"])
        return Response({
            "job": job.pk, "state": job.state, "run": run, "runs": job.restarts + 1,
            "ranks": [{"run": p.run, "rank": p.rank, "host": p.host.name, "state": p.state, "exit_code": p.exit_code,
                       "error": p.error, "tail": p.output_tail} for p in processes],
        })

    @extend_schema(request=CancelSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        if not can_cancel(request.user, job):
            raise PermissionDenied(f"job {job.pk} belongs to {job.user.username}; only they or a manager of "
                                   f"{job.project.name} may cancel it")
        if job.is_final:
            return Response({"detail": f"job {job.pk} already ended: {job.state}"}, status=status.HTTP_409_CONFLICT)
        serializer = CancelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = job_cancel(job=job, actor=request.user, reason=serializer.validated_data["reason"])
        job = self.get_queryset().get(pk=job.pk)
        return Response(JobDetailSerializer(job, context=job_context([job], request.user)).data)


@extend_schema(
    tags=["usage"],
    parameters=[OpenApiParameter("since", description=f"{TIME_HELP}; default 30 days ago"),
                OpenApiParameter("until", description="default now"),
                OpenApiParameter("cluster", description="default every cluster"),
                OpenApiParameter("unit", description="this unit and those under it; default every unit")],
    responses={200: dict},
)
class UsageView(APIView):
    """GPU-hours used by unit and by user over a period, allocated (charged) and unallocated (free), against
    each unit's entitlement: `allot usage`, the Usage page."""

    def get(self, request):
        return Response(usage_payload(request.query_params))


def usage_payload(params) -> dict:
    """The usage report for `params` (UsageForm's fields), or a 400 naming the field."""
    form = UsageForm(params)
    if not form.is_valid():
        raise ValidationError(form_errors(form))
    return form.report()


@extend_schema(tags=["agent"], request=HeartbeatSerializer, responses={200: dict})
class HeartbeatView(APIView):
    """An agent reports its host's health and processes; the reply holds its assignments and stops.

    Entries are checked one by one: the reply's `refused` names each bad one and why, the rest is applied.
    A host of a simulated cluster is refused (409): its jobs exist only in simulated time."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    def post(self, request):
        serializer = HeartbeatSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        host = request.user.host
        if data["host"] != host.name:
            raise PermissionDenied(f"this token acts for {host.name}, not {data['host']}")
        cluster = host.domain.cluster
        if cluster.executor == Executor.SIMULATED:
            # Its jobs (anyone's) exist only in simulated time: an agent must not run them for real.
            return Response({"detail": f"{host.name} belongs to {cluster.name}, whose jobs are simulated (executor: "
                                       "simulated): no agent may run them. Set `executor: agent` in the cluster "
                                       "file to run jobs on real hosts."}, status=status.HTTP_409_CONFLICT)
        entries, refused = checked_entries(data)
        agent = entries["agent"]
        if agent and agent["mode"] == "single-user" and agent["uid"] == 0 and not cluster.allow_root_jobs:
            raise PermissionDenied(f"a single-user agent running as root would run every job on {host.name} as root, "
                                   f"and {cluster.name} does not allow root jobs (policy allow_root_jobs): run the "
                                   "agent as root without --single-user, or as another account")
        beat = Heartbeat(
            host=host, address=data["address"], gpus=entries["gpus"], events=entries["events"],
            processes=[ProcessReport(**process) for process in entries["processes"]], agent=agent, refused=refused,
        )
        return Response(agent_heartbeat(beat))
