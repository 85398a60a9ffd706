"""The code of the hook runner process, which forks a subreaper per hook (see `._process`).

It runs as ``python -I -S -c RUNNER_CODE <socket fd>``: passed on the command line, so no file
a tool could rewrite is ever executed, and with the standard library alone.
"""

__all__ = ["RUNNER_CODE"]

RUNNER_CODE = r"""
import ctypes, json, os, select, signal, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[1]))
def children():
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found
def reap_all():
    while True:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
def serve(request, fds):
    stdin, stdout, stderr, life, status = fds
    def report(text):
        os.write(status, text.encode("utf-8", "replace"))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    report(f"pid {os.getpid()}\n")
    if libc.prctl(36, 1, 0, 0, 0) != 0:
        report("error cannot become a child subreaper: " + os.strerror(ctypes.get_errno()))
        return
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for src, dst in ((stdin, 0), (stdout, 1), (stderr, 2)):
                os.dup2(src, dst)
            for name in os.listdir("/proc/self/fd"):
                if int(name) > 2 and int(name) != wr:
                    try:
                        os.close(int(name))
                    except OSError:
                        pass
            os.chdir(request["cwd"])
            os.setsid()
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.execve(request["argv"][0], request["argv"], request["env"])
        except BaseException as exc:
            os.write(wr, (type(exc).__name__ + ": " + str(exc)).encode("utf-8", "replace"))
        os._exit(127)
    os.close(wr)
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    failed = os.read(rd, 4096)
    os.close(rd)
    if failed:
        reap_all()
        report("error " + failed.decode("utf-8", "replace"))
        return
    pidfd = os.pidfd_open(pid)
    ready = select.select([pidfd, life], [], [])[0]
    outcome = "killed"
    if pidfd in ready:
        _, st = os.waitpid(pid, 0)
        outcome = f"signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st) else f"exit {os.WEXITSTATUS(st)}"
    reap_all()
    report(outcome)
if os.fork() != 0:
    os._exit(0)  # the host waits for this first process at once; the runner lives on, detached
os.setsid()
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reapers are reaped by the kernel
while True:
    try:
        message, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 5)
    except InterruptedError:
        continue
    except OSError:
        break
    if not message:
        break
    if len(fds) == 5:
        try:
            request = json.loads(message)
        except ValueError:
            request = None
        if request is not None and os.fork() == 0:
            try:
                ctl.close()
                serve(request, fds)
            finally:
                os._exit(0)
    for fd in fds:
        os.close(fd)
"""
"""The runner's source: serves hook requests on the socket whose descriptor is its argument."""
