"""Launch configs: torchrun, Slurm and Kubernetes, for meshplan's runner and other frameworks."""
