"""Rotary positions rescaled at inference for inputs longer than any training example:
position interpolation (Chen et al. 2023), NTK-aware base scaling, YaRN (Peng et al. 2023).

Each takes the factor s = max(1, L_input / L_train) of the input's length against the model's
longest training source (onmt_translate's rotary_scaling and rotary_training_length; the
checkpoint's longest_training_source, which onmt_train records). At s = 1 every one is the
model's own rotation."""
import dataclasses
import math

import torch

from onmt_posenc.core.errors import UserError

SCALINGS = ("interpolation", "ntk", "yarn")
# YaRN's ramp (Peng et al. 2023, sec. 3.2): frequencies with fewer than ALPHA rotations over
# the training length are interpolated, those with more than BETA kept; their LLaMA values
YARN_ALPHA, YARN_BETA = 1.0, 32.0


class RotaryScalingError(UserError, ValueError):
    """onmt_translate's rotary_scaling for a model it cannot rescale."""


@dataclasses.dataclass(frozen=True)
class RotaryScaling:
    """One of SCALINGS at the factor s (>= 1) for a model whose longest training source is
    `training_length` tokens."""

    method: str
    factor: float
    training_length: int

    @classmethod
    def for_input(cls, method, input_length, training_length):
        return cls(method, max(1.0, input_length / training_length), training_length)

    def frequencies(self, dim, base):
        """theta'_i for the planes i = 0 .. dim/2 - 1 (float64), theta_i = base**(-2i/dim):
        - interpolation (Chen et al. 2023): positions m/s, so theta_i / s;
        - ntk (NTK-aware scaling, as Peng et al. 2023 state it): the base times
          s**(dim/(dim-2)), which interpolates the lowest frequency by s and keeps the highest;
        - yarn (Peng et al. 2023, NTK-by-parts with the temperature): per plane, with r_i = L_train / lambda_i the
          rotations of its wavelength lambda_i = 2 pi / theta_i over the training length and the
          ramp gamma(r) = clamp((r - alpha) / (beta - alpha), 0, 1):
          (1 - gamma(r_i)) theta_i / s + gamma(r_i) theta_i."""
        exponents = -torch.arange(0, dim, 2, dtype=torch.float64) / dim
        theta = base**exponents
        if self.method == "interpolation":
            return theta / self.factor
        if self.method == "ntk":
            return (base * self.factor ** (dim / (dim - 2))) ** exponents
        rotations = self.training_length * theta / (2 * math.pi)
        ramp = ((rotations - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0, 1)
        return (1 - ramp) * theta / self.factor + ramp * theta

    def magnitude(self):
        """What q and k are multiplied by: YaRN's sqrt(1/t) = 0.1 ln s + 1, so that the
        logits are divided by its temperature t; 1 for the others."""
        return 0.1 * math.log(self.factor) + 1 if self.method == "yarn" else 1.0


def rotation_table(scaling, dim, positions, base):
    """(positions, dim) complex, OpenNMT-py's table layout (`rotaryembeddings`): in plane i,
    position m turned by m theta'_i with the magnitude of `scaling`, the dim/2 columns twice."""
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), scaling.frequencies(dim, base)).float()
    table = torch.polar(torch.full_like(angles, scaling.magnitude()), angles)
    return torch.cat((table, table), dim=1)
