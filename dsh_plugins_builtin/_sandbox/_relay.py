"""The relay inside a command's network namespace (run as a script, standard library only).

``python -I -S -c "$(cat _relay.py)" CONTROL_FD PORT ARGV...``: listens on ``127.0.0.1:PORT`` (the only
interface of the namespace is loopback), starts *ARGV*, and hands every connection to the host's
proxy (`dsh_plugins_builtin._sandbox._proxy`) as one end of a fresh socket pair sent with
SCM_RIGHTS over CONTROL_FD, copying bytes between the two. It exits as *ARGV* does. The command
never holds CONTROL_FD (it is closed before ``exec``).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _relay(conn: socket.socket, control: socket.socket, lock: threading.Lock) -> None:
    ours, theirs = socket.socketpair()
    with conn, ours:
        try:
            with lock:
                socket.send_fds(control, [b"c"], [theirs.fileno()])
        except OSError:
            return
        finally:
            theirs.close()
        back = threading.Thread(target=_copy, args=(ours, conn), daemon=True)
        back.start()
        _copy(conn, ours)
        back.join()


def _serve(listener: socket.socket, control: socket.socket) -> None:
    lock = threading.Lock()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_relay, args=(conn, control, lock), daemon=True).start()


def _untouchable() -> None:
    """The relay is its namespace's first process: no signal from inside may end it
    (Python's own SIGINT handler would), and its memory (it holds the control socket) is
    no one else's to write through /proc/1/mem (``PR_SET_DUMPABLE`` 0; the command, which
    execs, is dumpable again)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def main() -> None:
    _untouchable()
    control = socket.socket(fileno=int(sys.argv[1]))
    control.set_inheritable(False)
    listener = socket.create_server(("127.0.0.1", int(sys.argv[2])))
    argv = sys.argv[3:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
            os._exit(127)
    listener.set_inheritable(False)
    threading.Thread(target=_serve, args=(listener, control), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    # Killed by a signal: exit as bwrap reports it (128 + N). The relay is its namespace's
    # first process, which no signal from inside it can end, not even its own.
    os._exit(128 - code if code < 0 else code & 0xFF)


if __name__ == "__main__":
    main()
