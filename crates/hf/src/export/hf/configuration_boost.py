"""Configuration of a BOOST low-rank model (svd, cola or lax) exported by `boost export`.

The keys are those of config.json; `boost_ref.config_from_export` reads them into the model
description the reference forward takes.
"""

from transformers import PretrainedConfig


class BoostConfig(PretrainedConfig):
    model_type = "boost"

    def __init__(self, tie_word_embeddings=False, **kwargs):
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
