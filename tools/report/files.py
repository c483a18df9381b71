"""Files written whole: a temporary file in the same directory, flushed,
fsync'ed and renamed over the target, so a reader never sees half of one."""
import os
import tempfile


def write_atomic(path, data):
    """data (str or bytes) into path through a temporary file in its directory."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
