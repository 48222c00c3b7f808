"""``python -m hailstorm.negotiator TOPOLOGY [--zk HOSTS] ...``"""

import sys

from hailstorm.negotiator.daemon import main

sys.exit(main())
