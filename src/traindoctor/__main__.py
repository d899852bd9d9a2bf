import sys

from traindoctor.cli import main

sys.exit(main())
