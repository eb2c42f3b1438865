#!/usr/bin/env python3
"""make install-python: copy the pagestream package, libpagestream.so and the
`pagestream` CLI (when built next to the library) into site-packages.

    install.py [LIB] [--target DIR] [--user]

LIB defaults to build/libpagestream.so; DIR to this interpreter's purelib
(on Debian /usr/local/lib/python3.X/dist-packages, which the system Python
searches). Works without pip.
"""
import os
import shutil
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    lib = None
    target = None
    user = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--target" and i + 1 < len(argv):
            target = argv[i + 1]
            i += 2
            continue
        if a == "--user":
            user = True
        elif a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        elif a.startswith("-"):
            print("install.py: unknown option %s" % a, file=sys.stderr)
            return 2
        else:
            lib = a
        i += 1
    lib = os.path.abspath(lib or os.path.join(HERE, "..", "build", "libpagestream.so"))
    if not os.path.isfile(lib):
        print("install.py: %s not found: build it first (make)" % lib, file=sys.stderr)
        return 1
    if target is None:
        if user:
            import site
            target = site.getusersitepackages()
        else:
            target = sysconfig.get_paths()["purelib"]
    dest = os.path.join(target, "pagestream")
    src = os.path.join(HERE, "pagestream")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            shutil.copy2(os.path.join(src, name), os.path.join(dest, name))
    shutil.copy2(lib, os.path.join(dest, "libpagestream.so"))
    cli = os.path.join(os.path.dirname(lib), "pagestream")
    if os.path.isfile(cli):
        os.makedirs(os.path.join(dest, "bin"))
        shutil.copy2(cli, os.path.join(dest, "bin", "pagestream"))
    print("installed pagestream into %s (library %s%s)" % (dest, os.path.basename(lib),
                                                         ", CLI" if os.path.isfile(cli) else ""))
    if target not in [os.path.abspath(p) for p in sys.path if p]:
        print("note: %s is not on this Python's path; add it to PYTHONPATH" % target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
