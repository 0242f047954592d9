import asyncio
import sys

from zeromem.demo.fleet import main

sys.exit(asyncio.run(main()))
