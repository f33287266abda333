"""The co-access graph (seed memory-system-v3-design.md "Co-Access Graph"): which
files of a project are changed or read together, bootstrapped from ``git log`` before any session
exists and used to predict the files a piece of work will need. See docs/v3.md."""
