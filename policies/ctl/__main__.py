"""`python -m policies.ctl`: amqpctl without the console script."""

import sys

from .main import main

sys.exit(main())
