"""Run a real job on a real GPU through `allot-agent`, and print what NVML reported.

    .venv/bin/python bench/gpu_agent_check.py [--run-as ACCOUNT] [--timeout 120] [--json]

For a GPU host with NVIDIA's driver and `pip install 'allot[agent]'`. It asks NVML what the host has, then
sets up a throwaway Allot of one host with that many GPUs (SQLite in a temporary directory, `runserver`
and `run_scheduler` on 127.0.0.1), starts the real agent with its token in a 0600 file, submits a 1-GPU
job that runs `nvidia-smi` as ACCOUNT (default: the one who ran sudo, else this one), and prints what the
agent reported: each GPU as NVML sees it (UUID, uncorrected ECC errors, pending retired pages and row
remaps), health events, the host's containment, and the job's output: which GPU it got, and what it could
see of the others.

Exit codes: 0 the job ran `nvidia-smi` on its GPU and NVML answered; 1 something failed (said why); 3 this
machine has no NVML (no NVIDIA driver, or nvidia-ml-py not installed): nothing was checked, and it says so.
"""

import argparse
import json
import os
import pwd
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from client.api import ApiError, Client, Unreachable  # noqa: E402
from client.nvml import NvmlProbe, pynvml  # noqa: E402

NO_GPU = 3
HOST = "gpucheck-01-h01"
PYTHON = sys.executable
JOB = ("echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; id; "
       "nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader 2>&1; echo nvidia-smi=$?")


def nvml_now() -> tuple[NvmlProbe | None, str]:
    if pynvml is None:
        return None, "nvidia-ml-py is not installed: pip install 'allot[agent]'"
    probe = NvmlProbe()
    sample = probe.sample()
    if sample is None:
        return None, "no NVML on this machine (libnvidia-ml.so.1 not found: no NVIDIA driver)"
    if not sample.gpus:
        errors = "; ".join(event.get("detail", "") for event in sample.events) or "none reported"
        return None, f"NVML answers but sees no GPU (errors: {errors})"
    return probe, ""


def free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def manage(env: dict, *args: str) -> str:
    done = subprocess.run([PYTHON, str(REPO / "manage.py"), *args], env=env, cwd=REPO, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"manage.py {args[0]} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-as", default=os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name,
                        help="the account the job runs as (default: the one who ran sudo, else this one)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    probe, missing = nvml_now()
    if probe is None:
        print(f"gpu_agent_check: nothing checked: {missing}.", file=sys.stderr)
        print("Run it on a host with an NVIDIA GPU and driver, with `pip install 'allot[agent]'`.", file=sys.stderr)
        return NO_GPU
    sample = probe.sample()
    probe.stop()
    try:
        account = pwd.getpwnam(args.run_as)
    except KeyError:
        print(f"gpu_agent_check: no such account here: {args.run_as}", file=sys.stderr)
        return 1

    workdir = Path(tempfile.mkdtemp(prefix="allot-gpu-check-"))
    workdir.chmod(0o755)
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DEBUG")},
           "DATABASE_URL": f"sqlite:///{workdir / 'allot.sqlite3'}", "SECRET_KEY": secrets.token_hex(16),
           "ALLOWED_HOSTS": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"}
    password = secrets.token_hex(8)
    cluster = {"name": "gpucheck", "policy": {"tick": "1s", "heartbeat_timeout": "12s", "grace_period": "5s",
                                              "allow_root_jobs": account.pw_uid == 0},
               "domains": [{"name": "gpucheck-{:02d}", "count": 1, "hosts": 1, "gpus_per_host": len(sample.gpus),
                            "gpu_type": "GPU"}]}
    org = {"users": [{"username": "checker", "password": password, "posix_user": args.run_as}],
           "units": [{"name": "check", "members": ["checker"], "share": {"gpucheck": 100}}]}
    (workdir / "cluster.yaml").write_text(json.dumps(cluster))
    (workdir / "org.yaml").write_text(json.dumps(org))
    children: list[subprocess.Popen] = []
    try:
        manage(env, "migrate", "--no-input", "-v", "0")
        manage(env, "load_cluster", str(workdir / "cluster.yaml"))
        manage(env, "load_org", str(workdir / "org.yaml"))
        token_file = workdir / "agent.token"
        token_file.write_text(manage(env, "agent_token", HOST).strip())
        token_file.chmod(0o600)
        logs = {name: open(workdir / f"{name}.log", "wb") for name in ("web", "scheduler", "agent")}
        children.append(subprocess.Popen([PYTHON, str(REPO / "manage.py"), "runserver", "--noreload",
                                          f"127.0.0.1:{port}"], env=env, cwd=REPO, stdout=logs["web"],
                                         stderr=subprocess.STDOUT))
        children.append(subprocess.Popen([PYTHON, str(REPO / "manage.py"), "run_scheduler"], env=env, cwd=REPO,
                                         stdout=logs["scheduler"], stderr=subprocess.STDOUT))
        agent_env = {k: v for k, v in env.items() if k not in ("DATABASE_URL", "SECRET_KEY")}
        children.append(subprocess.Popen(
            [str(Path(PYTHON).with_name("allot-agent")), "--server", server, "--token-file", str(token_file),
             "--host", HOST, "--workdir", str(workdir / "agent"), "--address", "127.0.0.1"],
            env=agent_env, stdout=logs["agent"], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + args.timeout
        api = None
        while api is None:
            try:
                api = Client(server, token=Client(server).post(
                    "auth/token/", {"username": "checker", "password": password})["token"])
            except Unreachable:
                if time.monotonic() > deadline:
                    raise SystemExit("the throwaway server did not start; see " + str(workdir / "web.log")) from None
                time.sleep(0.5)
        job = api.post("jobs/", {"cluster": "gpucheck", "project": "check", "gpus": 1, "min_runtime": 60,
                                 "resumable": False, "command": JOB,
                                 "workdir": account.pw_dir if os.path.isdir(account.pw_dir) else "/tmp"})
        while job["state"] not in ("completed", "failed", "cancelled", "preempted"):
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job['id']} still {job['state']} after {args.timeout:.0f} s; agent log: "
                                 f"{(workdir / 'agent.log').read_text(errors='replace')[-2000:]}")
            time.sleep(1)
            job = api.get(f"jobs/{job['id']}/")
        host = api.get(f"hosts/{HOST}/")
    except (ApiError, SystemExit) as error:
        print(f"gpu_agent_check: failed: {error}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()

    report = {
        "nvml": sample.gpus, "nvml_events": sample.events,
        "agent": {key: host[key] for key in ("agent_mode", "containment", "containment_note")},
        "host_gpus": [{key: gpu[key] for key in ("id", "health", "health_event")} for gpu in host["gpus"]],
        "job": {key: job[key] for key in ("id", "state", "exit_code", "failure_reason")},
        "ran_on": next((event["detail"] for event in job["events"] if event["kind"] == "start"), ""),
        "output": [output["tail"] for output in job.get("output", [])],
        "workdir": str(workdir),
    }
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"NVML on this host: {len(sample.gpus)} GPU(s)")
        for gpu in sample.gpus:
            print(f"  GPU {gpu['index']}: {gpu['uuid']} health {gpu['health']}, uncorrected ECC (volatile) "
                  f"{gpu['ecc_uncorrected_volatile']}, retired pages pending {gpu['retired_pages_pending']}, "
                  f"row remap pending {gpu['remapped_rows_pending']}")
        for event in sample.events:
            print(f"  event: {event}")
        print(f"Agent: {report['agent']['agent_mode']}, containment {report['agent']['containment']} "
              f"({report['agent']['containment_note']})")
        print(f"Job {job['id']} ({report['ran_on'] or 'never started'}): {job['state']}, exit code {job['exit_code']}"
              + (f" ({job['failure_reason']})" if job["failure_reason"] else ""))
        for tail in report["output"]:
            print("  " + tail.rstrip().replace("\n", "\n  "))
        print(f"(logs in {workdir})")
    ran = job["state"] == "completed" and any("nvidia-smi=0" in tail for tail in report["output"])
    if not ran:
        print("gpu_agent_check: the job did not run nvidia-smi on its GPU (see its output above)", file=sys.stderr)
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
