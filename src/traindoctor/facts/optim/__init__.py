"""Optimizers: the live audit of param groups against the model's modules."""

#: A weight decay below this shrinks a weight by less than 1% over a million steps at a learning
#: rate of 0.01 (``(1 - lr * wd) ** steps``): applying it to biases and norm gains costs nothing,
#: and TD204 says nothing of it (Pytorch-UNet's RMSprop uses 1e-8), static and runtime alike.
NEGLIGIBLE_WEIGHT_DECAY = 1e-6
