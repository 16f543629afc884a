"""perflab: declarative, statistically honest A/B experiments for PyTorch optimizations.

Data flows one way: config (perflab.config.schema) -> trial in a fresh process (perflab.measure.trial,
perflab.isolation) -> JSON record (perflab.records) -> statistics (perflab.analysis.stats) ->
console text (perflab.report.console). Importing this package imports no torch.
"""

__version__ = "0.1.0"
