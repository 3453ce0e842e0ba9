"""What a job rank runs as, where, and with what environment; reading back what it wrote, safely.

The agent (root) decides, for each assignment: the POSIX account (`resolve_account`; uid 0 only where the
cluster allows root jobs), the environment (`job_environment`: built from nothing, never the agent's
own), the private directory for its log, host file and checkpoint marker (`prepare_job_dir`: mode 0700,
owned by the account, in a jobs directory outside the agent's root-only state directory). Files the job
owns are read back with every path component opened without following symlinks and the file's owner
checked, so a job cannot make the root agent read someone else's file for it.
"""

import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from client.text import clean_bytes

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Set by the agent for every job: a job's own `env` cannot replace them.
RESERVED_NAMES = frozenset({
    "HOME", "USER", "LOGNAME", "SHELL", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "MASTER_ADDR", "MASTER_PORT",
    "WORLD_SIZE", "NODE_RANK", "NNODES",
})
RESERVED_PREFIXES = ("ALLOT_", "PET_")
TAIL_BYTES = 8000


class Refused(Exception):
    """An assignment the agent will not run, with the reason the job's page shows."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    shell: str


def account_of(entry: pwd.struct_passwd) -> Account:
    return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir,
                   shell=entry.pw_shell or "/bin/sh")


def resolve_account(name: str, *, host: str, own: Account | None, allow_root: bool, cluster: str = "") -> Account:
    """The account a job runs as on this host.

    A root agent (`own` None) runs it as `name`; a single-user agent (`own` its account) only runs jobs of
    its own account. Either way uid 0 only where the cluster's policy allows root jobs.
    """
    if own is not None:
        if name != own.name:
            raise Refused(f"the single-user agent on {host} runs only {own.name}'s jobs, not {name}'s")
        account = own
    else:
        try:
            account = account_of(pwd.getpwnam(name))
        except KeyError:
            raise Refused(f"no such user on {host}: {name}") from None
    if account.uid == 0 and not allow_root:
        where = f"cluster {cluster}" if cluster else "this cluster"
        raise Refused(f"refused on {host}: the job would run as root ({account.name}, uid 0) and {where} does "
                      "not allow root jobs (policy allow_root_jobs)")
    return account


def check_job_env(env) -> dict[str, str]:
    """The job's own variables, checked again here (the server checks them at submit)."""
    if not isinstance(env, dict):
        raise Refused("the job's env must be a mapping of NAME to VALUE")
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise Refused(f"the job's env has an invalid variable name: {name!r}")
        if not isinstance(value, str) or "\x00" in value:
            raise Refused(f"the job's env variable {name} must be text without NUL")
        if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
            raise Refused(f"the job's env may not set {name}: the agent sets it")
    return dict(env)


def job_environment(*, account: Account, assignment: dict, host: str, cuda_devices: str, job_dir: Path,
                    run_dir: Path) -> dict[str, str]:
    """The whole environment of a rank: the account's, the job's own variables, then Allot's."""
    job, rank = assignment["job"], assignment["rank"]
    world = int(assignment["world_size"])
    gpus = assignment.get("gpus") or []
    master_port = str(assignment["master_port"])
    env = {"HOME": account.home, "USER": account.name, "LOGNAME": account.name, "SHELL": account.shell,
           "PATH": DEFAULT_PATH}
    env.update(check_job_env(assignment.get("env") or {}))
    env.update({
        "CUDA_VISIBLE_DEVICES": cuda_devices,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA's numbering = NVML's = the indices Allot assigns
        "ALLOT_JOB_ID": str(job),
        "ALLOT_RANK": str(rank),
        "ALLOT_WORLD_SIZE": str(world),
        "ALLOT_RESTARTS": str(assignment["restarts"]),
        "ALLOT_GPU_MILLI": str(assignment.get("gpu_milli", 1000)),
        "ALLOT_HOST": host,
        "ALLOT_JOB_DIR": str(job_dir),
        "ALLOT_CHECKPOINT_FILE": str(job_dir / "checkpoint"),
        "ALLOT_HOSTFILE": str(run_dir / "hostfile"),
        "MASTER_ADDR": assignment["master_addr"],
        "MASTER_PORT": master_port,
        "WORLD_SIZE": str(world),
        "NODE_RANK": str(rank),
        "NNODES": str(world),
        # What torchrun reads (its --nnodes, --node-rank, --nproc-per-node, --master-addr, --master-port).
        "PET_NNODES": str(world),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(max(1, len(gpus))),
        "PET_MASTER_ADDR": assignment["master_addr"],
        "PET_MASTER_PORT": master_port,
    })
    return env


def prepare_job_dir(jobs_dir: Path, job: int, account: Account) -> Path:
    """`<jobs_dir>/job-<id>`: mode 0700, owned by the account. The jobs directory is root's (0711): only the
    agent creates entries there, so what it finds under this name it made itself."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    path = jobs_dir / f"job-{job}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        status = os.lstat(path)
        if not stat.S_ISDIR(status.st_mode):
            raise Refused(f"{path} exists and is not a directory") from None
    if os.geteuid() == 0:
        os.chown(path, account.uid, account.gid, follow_symlinks=False)
    os.chmod(path, 0o700)
    return path


def _open_owned(root: Path, parts: list[str], uid: int | None) -> int | None:
    """A file under `root`, every component opened without following a symlink; None unless it is a
    regular file owned by `uid` (when given)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    status = os.fstat(file_fd)
    if not stat.S_ISREG(status.st_mode) or (uid is not None and status.st_uid != uid):
        os.close(file_fd)
        return None
    return file_fd


def read_tail(root: Path, parts: list[str], uid: int | None, *, limit: int = TAIL_BYTES) -> str:
    """The end of a job's log, cleaned (client/text.py); '' when it is not the job's own file."""
    fd = _open_owned(root, parts, uid)
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    return clean_bytes(data, limit=limit)


def owned_mtime(root: Path, parts: list[str], uid: int | None) -> float | None:
    """The modification time of the job's own file (its checkpoint marker), or None."""
    fd = _open_owned(root, parts, uid)
    if fd is None:
        return None
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)
