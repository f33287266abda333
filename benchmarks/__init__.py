"""memlane's research benchmarks, beside the product (``memlane bench ...``, ``memlane replay ...``).

Not part of the ``memlane`` package: the commands are defined in :mod:`benchmarks.cli` and
loaded by memlane's command line only when a ``bench`` or ``replay`` command runs
(:mod:`memlane.cli.lazy`). It is a distribution of its own, ``memlane-benchmarks``
(benchmarks/pyproject.toml), so the memlane wheel holds no benchmark code; ``make install``
installs both. The tests import the scripted LLM
(:mod:`benchmarks.scripted_llm`) and the daemon starter (:mod:`benchmarks.daemon`) from here.
The commands, their data and their numbers: docs/benchmarks.md.
"""
