"""The hook client as ``memlane connect claude-code`` installs it: ``<python> -S -I <this file> EVENT``.

Claude Code starts a new interpreter for every hook call, so the installed command skips what
a hook does not need: ``-S`` skips ``site`` (the venv's ``.pth`` files and site-packages
scan), ``-I`` (isolated mode: ``-E -P -s``) ignores ``PYTHON*`` variables and never puts this
file's directory on ``sys.path``, so nothing in the package directory can shadow a standard
library module. This file then appends the directory that holds the ``memlane`` package (the
venv's site-packages, or ``src/`` of an editable install) to ``sys.path``, after the standard
library, and runs :func:`memlane.hookclient.main`, which imports only the standard library and
memlane's leaf modules. The interpreter compiles this file on every run (a script gets no
bytecode cache), which is why it holds nothing else.

The ``memlane-hook`` console script and ``python -m memlane.hookclient`` run the same
:func:`~memlane.hookclient.main` with ``site``.
"""

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from memlane.hookclient import main

sys.exit(main())
