"""zyx-explore: a Textual debugger over the engine's compilation stages."""

__version__ = "0.1.0"
