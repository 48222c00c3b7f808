"""``python -m negotiator TOPOLOGY [--zk HOSTS] ...``"""

import sys

from negotiator.daemon import main

sys.exit(main())
