"""Running the services inside the test process, against the real servers."""

from zeromem.embedded.inprocess import InProcessServices as ServiceSet

__all__ = ["ServiceSet"]
