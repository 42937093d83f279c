"""What the Python scripts of docs/scale share: running git, committing as a fixed identity,
and a free TCP port on 127.0.0.1. The scripts import it from their own directory."""

import socket
import subprocess


def git(*args, cwd=None, env=None, input=None):
    """Run `git ARGS`; its standard output (bytes). Raises if git fails."""
    return subprocess.run(["git", *args], cwd=cwd, env=env, input=input, check=True,
                          capture_output=True).stdout


def commit(work, *args):
    """`git commit -q ARGS` in the work tree `work`, as the author and committer t <t@e>."""
    return git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", *args, cwd=work)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
