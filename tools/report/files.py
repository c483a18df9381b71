"""Files written whole: a temporary file in the same directory, flushed,
fsync'ed and renamed over the target, so a reader never sees half of one."""
import os
import tempfile

from .runs import ReportError


def write_atomic(path, data):
    """data (str or bytes) into path through a temporary file in its directory;
    a failed write (a full disk) leaves the old file as it was, no temporary
    file, and raises ReportError naming path."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ReportError(f"{path}: {e.strerror}") from None
        raise
