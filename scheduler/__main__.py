import sys

from scheduler.cli.main import main

sys.exit(main())
