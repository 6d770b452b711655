"""A BOOST low-rank model (svd, cola or lax) as a transformers causal LM.

The parameters carry the canonical names of the export's model.safetensors, and the forward
is the project's reference model (`boost_ref.py`, shipped beside this file), so the logits
are the training engine's. `generate()` works; it runs the whole sequence at each step (no
key/value cache here) and takes no padding mask: batch prompts of equal length.
"""

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .boost_ref import config_from_export, forward, param_shapes
from .configuration_boost import BoostConfig


def _child(root, path):
    """The submodule at dotted `path` under `root`, created (empty) where missing."""
    module = root
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, nn.Module())
        module = getattr(module, part)
    return module


class BoostForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = BoostConfig
    base_model_prefix = "boost"
    _no_split_modules = []

    def __init__(self, config):
        super().__init__(config)
        self.model_cfg = config_from_export(config.to_dict())
        for name, shape in param_shapes(self.model_cfg).items():
            *path, leaf = name.split(".")
            _child(self, path).register_parameter(leaf, nn.Parameter(torch.zeros(shape)))
        self.post_init()

    def _init_weights(self, module):
        # The weights always come from model.safetensors.
        pass

    def forward(self, input_ids=None, labels=None, **kwargs):
        params = dict(self.named_parameters())
        logits = forward(params, self.model_cfg, input_ids)
        loss = None
        if labels is not None:
            shift = logits[:, :-1].reshape(-1, logits.shape[-1])
            loss = nn.functional.cross_entropy(shift, labels[:, 1:].reshape(-1))
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        return {"input_ids": input_ids}
