"""Lets ``python -m pod_sweeper`` behave exactly like the ``pod-sweeper`` console script."""

from pod_sweeper.cli.main import main

raise SystemExit(main())
