import sys

from testbed.emu.engine._server import main

sys.exit(main())
