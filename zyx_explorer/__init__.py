"""zyx-explore: a Textual debugger over the engine's compilation stages."""

import os

__version__ = "0.1.0"

# A key on a big e-graph paints two frames: the cursor, then the class detail it selects.  Textual waits one
# frame period between them (1/60 s by default); at 120 frames a second the detail follows within ~8 ms.
# Textual reads this once, when it is first imported; a value the user set wins.
os.environ.setdefault("TEXTUAL_FPS", "120")
