"""The process boundary: the fork server and its warm workers (isolation), what a
trial process is asked to do (trial_request), and the console a sweep prints on."""
