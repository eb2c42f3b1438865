"""pip install ./python: the pagestream package with libpagestream.so (and the
`pagestream` CLI, when built) copied into it.

The library is taken from $PAGESTREAM_LIB, else ../build/libpagestream.so
(build it first: `make`). No compile step here. On Debian 12 the system
Python is "externally managed": use a virtualenv (python3 -m venv
--system-site-packages, to keep Debian's torch), pip's
--break-system-packages, or `make install-python` (python/install.py).
No pyproject.toml on purpose: pip then builds with the setuptools already
installed instead of downloading one, so this works offline.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
# keep setuptools' metadata folder out of the source tree (build/ is ignored by git)
os.makedirs(os.path.join(HERE, "build"), exist_ok=True)


def _artifacts():
    lib = os.environ.get("PAGESTREAM_LIB") or os.path.join(HERE, "..", "build", "libpagestream.so")
    lib = os.path.abspath(lib)
    if not os.path.isfile(lib):
        raise SystemExit("pagestream: %s not found: build the library first (make), or set PAGESTREAM_LIB" % lib)
    cli = os.environ.get("PAGESTREAM_CLI") or os.path.join(os.path.dirname(lib), "pagestream")
    return lib, cli if os.path.isfile(cli) else None


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib, cli = _artifacts()
        dest = os.path.join(self.build_lib, "pagestream")
        shutil.copy2(lib, os.path.join(dest, "libpagestream.so"))
        if cli:
            os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
            shutil.copy2(cli, os.path.join(dest, "bin", "pagestream"))


class BinaryDistribution(Distribution):
    # the wheel carries a shared library: tag it for this platform
    def has_ext_modules(self):
        return True


setup(
    name="pagestream",
    version="0.1.0",
    description="Feed PyTorch training from paged datasets on disk, NFS, HTTP and S3 through a bounded cache",
    packages=["pagestream"],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithLibrary},
    distclass=BinaryDistribution,
    zip_safe=False,
    options={"egg_info": {"egg_base": os.path.join(HERE, "build")}},
)
