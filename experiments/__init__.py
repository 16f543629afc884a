# Ready-made studies, run by name: perflab +experiment=NAME
