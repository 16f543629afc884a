"""The sweep process: checks every variant, runs the rounds of fresh trial processes,
resumes an interrupted sweep, scales groups out as jobs, and writes the summary and the
report. It never imports torch: trials happen in other processes (perflab.measure)."""
