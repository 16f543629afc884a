"""perflab: declarative, statistically honest A/B experiments for PyTorch optimizations.

Data flows one way: config (perflab.config) -> trial in a fresh process (perflab.trial,
perflab.isolation) -> JSON record (perflab.records) -> statistics (perflab.stats) ->
console text (perflab.console). Importing this package imports no torch.
"""

__version__ = "0.1.0"
