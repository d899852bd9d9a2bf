"""Facts about the training loop itself: backward, optimizer steps, gradients, loss inputs."""
