"""The numbers of the study normgrow reproduces, as that study reports them
(Qwen3-8B-Base teacher distilled into a 9-layer student on one shard of 3.11
billion tokens; the README's first paragraph): the report shows each beside
normgrow's reading of the same thing. Validation CE in nats per token.
"""

SOURCE = ("the study normgrow reproduces (Qwen3-8B-Base teacher, 9-layer student, 3.11 billion tokens; "
          "see the README's first paragraph)")

# All 9 layers trained jointly: Pre- and Post-Norm's validation CE differ by
# this much (its sign is not given).
JOINT_DIFFERENCE = 0.0004
# Under the 3-stage growth curriculum: grown Post-Norm minus grown Pre-Norm.
GROWTH_DIFFERENCE = -0.0328
# Grown Post-Norm's validation CE; every fixed-depth control (extra tokens,
# matched layer-tokens, LR restarts) ends above it.
GROWN_POST_CE = 2.7330
# Std over tokens of the per-token residual RMS: grown Pre-Norm drifts from
# the first to the second; grown Post-Norm stays within the range.
GROWN_PRE_RMS_STD = (5.81, 19.98)
GROWN_POST_RMS_STD = (0.07, 0.19)
# Removing the final block of grown Pre-Norm changes its CE by this much;
# removing any block of grown Post-Norm raises it by at least the second.
GROWN_PRE_LAST_BLOCK_DCE = 0.02
GROWN_POST_MIN_BLOCK_DCE = 2.38
