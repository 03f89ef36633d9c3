import sys

from testbed.net.delay._server import main

sys.exit(main())
