"""Models outside torchvision that layerbench ships configs of, for scripts/torch_export.py
(run from the repository's root: `python3 scripts/torch_export.py transformer_models:bert_base
--input 128,768`).

bert_base: the encoder of BERT-base as PyTorch's own modules write it: 12
nn.TransformerEncoderLayer of d_model 768, 12 heads, a 3072-wide feed-forward with GELU,
post-norm, batch_first; 7,087,872 parameters per layer. The embeddings and the pooler
are left out: the input is the 128 x 768 token sequence.
"""
import torch.nn as nn


def bert_base():
    layer = nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.1, activation="gelu",
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=12)
