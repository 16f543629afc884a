# Makes the configs importable as perflab.conf, so Hydra finds them in an installed package.
