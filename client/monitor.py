"""The first process of each job rank: starts the command as the job's account and writes how it ended.

The agent starts it (`python -m client.monitor`) with the launch spec as JSON on standard input, so
nothing of the job — its environment above all — shows in any process list. The monitor stays outside
the rank's cgroup and, as root, out of the job's reach; it outlives an agent restart, and the exit file it
writes in the agent's root-only state directory tells a new agent how an adopted rank ended.

The command's process, between fork and exec: joins the rank's cgroup (while still root), starts its own
session, drops to the account (`initgroups`, gid, then uid, and checks that uid 0 cannot be taken back),
creates its run directory and log as that account (so a symlink planted in its own directory earns
nothing), writes the host file, enters the working directory and execs `/bin/sh -c COMMAND` with exactly
the environment the agent built. Anything failing on the way is reported through a close-on-exec pipe and
becomes the rank's error (`no such directory on node-01: /data/run`), never a half-started job.

The monitor is a child subreaper: whatever the command leaves behind is reparented to it and reaped, so
no zombie is left to a host's init that does not reap.
"""

import ctypes
import json
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
LAUNCH_FAILED = 127


class LaunchError(Exception):
    """What stopped the command from starting, in words for the job's page."""


def become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: orphans go to init, as before


def write_exit_file(path: str, **facts) -> None:
    with open(path + ".tmp", "w") as handle:
        json.dump(facts, handle)
    os.replace(path + ".tmp", path)


def drop_privileges(spec: dict) -> None:
    uid, gid, user = spec["uid"], spec["gid"], spec["user"]
    if os.geteuid() != 0:
        if os.getuid() != uid:
            raise LaunchError(f"the agent runs as uid {os.getuid()} and cannot start a job as {user} (uid {uid})")
        return
    os.initgroups(user, gid)
    os.setgid(gid)
    os.setuid(uid)
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            return
        raise LaunchError(f"could not drop privileges to {user}")


def start_command(spec: dict, errors: int) -> None:
    """In the forked child: become the job, then exec. Never returns."""
    host = spec["host"]
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    os.setsid()
    drop_privileges(spec)
    os.umask(0o022)
    run_dir = spec["run_dir"]
    try:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        output = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        hostfile = os.open(spec["hostfile"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(hostfile, "w") as handle:
            handle.write("".join(f"{name}\n" for name in spec["hosts"]))
    except OSError as error:
        raise LaunchError(f"cannot write the job's files in {run_dir} on {host}: {error.strerror}") from error
    workdir = spec["workdir"]
    try:
        os.chdir(workdir)
    except FileNotFoundError:
        raise LaunchError(f"no such directory on {host}: {workdir}") from None
    except NotADirectoryError:
        raise LaunchError(f"not a directory on {host}: {workdir}") from None
    except PermissionError:
        raise LaunchError(f"{spec['user']} may not enter {workdir} on {host}") from None
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)  # Python ignores some; an exec'd program must not inherit that
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.closerange(3, errors)
    os.closerange(errors + 1, 65536)
    os.execve("/bin/sh", ["/bin/sh", "-c", spec["command"]], spec["env"])


def main() -> int:
    spec = json.load(sys.stdin)
    exit_file = spec["exit_file"]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: None)  # a handler, unlike SIG_IGN, is not inherited through exec
    become_subreaper()
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            start_command(spec, write_end)
            message = "exec returned"
        except LaunchError as error:
            message = str(error)
        except OSError as error:
            message = f"cannot start the job on {spec['host']}: {error.strerror or error}"
        except BaseException as error:  # whatever it was, the agent must hear of it
            message = f"cannot start the job on {spec['host']}: {error}"
        os.write(write_end, message.encode()[:1000])
        os._exit(LAUNCH_FAILED)
    os.close(write_end)
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
    os.close(1)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    error = b"".join(chunks).decode(errors="replace")
    code = None
    while True:
        try:
            reaped, status = os.wait()
        except ChildProcessError:
            break  # the command and everything it left behind are gone
        except InterruptedError:
            continue
        if reaped == pid:
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code  # killed by signal N → 128 + N
            if error:
                write_exit_file(exit_file, code=None, error=error)
            else:
                write_exit_file(exit_file, code=code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
