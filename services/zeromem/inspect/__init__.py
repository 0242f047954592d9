"""``zeromem inspect``: a web page that shows what the fleet remembers, why a recall chose
what it chose, and what it saved.

One module per concern: ``app`` (the routes and their HTML and JSON responses), ``access``
(bearer tokens and the viewers they name), ``connections`` (one NATS connection per
viewer's credential), ``memories``, ``playground``, ``savings`` and ``operations`` (each
view's data), ``live`` and ``tail`` (server-sent event streams), ``server`` (the command),
``templates/`` and ``static/`` (the page: Jinja templates, htmx and uPlot vendored with
their lock file in ``static/vendor``).
"""

from zeromem.inspect.app import create_app
from zeromem.settings import InspectSettings

__all__ = ["InspectSettings", "create_app"]
