"""The training Job of spec.learning: hidden states from the target, an EAGLE-3 head trained on them."""
