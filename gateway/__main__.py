"""``python -m gateway`` runs the command line interface."""

from gateway.cli import main

raise SystemExit(main())
