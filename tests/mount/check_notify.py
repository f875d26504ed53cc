"""A foreground daemon as systemd runs it (Type=notify): READY=1 arrives on
$NOTIFY_SOCKET once the mount answers, and SIGTERM ends it with exit 0 after a clean
unmount. Every wait is bounded; the mount is undone whatever happens.

usage: check_notify.py CKPTFS SOURCE MOUNTPOINT
"""
import os
import signal
import socket
import subprocess
import sys
import time


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def main():
    ckptfs, source, mountpoint = sys.argv[1:4]
    sock_path = os.path.join(os.path.dirname(mountpoint), "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    daemon = subprocess.Popen([ckptfs, "mount", "-f", source, mountpoint], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        message = sock.recv(4096).decode()
        assert "READY=1" in message.split("\n"), f"notify message {message!r}"
        assert f"MAINPID={daemon.pid}" in message, f"notify message {message!r}"
        # READY means the mount answers now, not later.
        assert mounted(mountpoint), "READY=1 before the mount is listed"
        assert "model.safetensors" in os.listdir(mountpoint)
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=10)
        err = daemon.stderr.read().decode()
        assert code == 0, f"exit {code} after SIGTERM; stderr: {err}"
        assert not mounted(mountpoint), "still mounted after SIGTERM"
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=10)
        if mounted(mountpoint):
            subprocess.run(["fusermount3", "-uz", mountpoint], timeout=10)
    print("notify: READY=1 once the mount answered; SIGTERM exited 0 and unmounted")


if __name__ == "__main__":
    main()
