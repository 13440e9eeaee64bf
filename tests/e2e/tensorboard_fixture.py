"""The small causal-LM run of the TensorBoard checks (tests/e2e/tensorboard.sh and
scripts/golden/tensorboard_offline.sh): a corpus of random sentences and its config.

    python3 tensorboard_fixture.py DIR STEPS EVERY

Writes DIR/lm.txt, DIR/lm-valid.txt and DIR/tb.yaml: runs go to DIR/runs, STEPS steps with a
row every step, validation and a checkpoint every EVERY steps.
"""
import random
import sys

d, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(5)
words = "in the beginning god created heaven and earth light darkness water day night".split()
for name, n in (("lm.txt", 400), ("lm-valid.txt", 40)):
    with open(f"{d}/{name}", "w") as f:
        for _ in range(n):
            f.write(" ".join(random.choice(words) for _ in range(random.randint(5, 14))) + ".\n")
with open(f"{d}/tb.yaml", "w") as f:
    f.write(f"""run: {{out_dir: {d}/runs, seed: 3, threads: 2}}
data: {{source: text, train: {d}/lm.txt, valid: {d}/lm-valid.txt, prepared_dir: {d}/prep,
       tokenizer: {{type: spm, vocab_size: 64}}}}
task: {{type: clm, seq_len: 24}}
model: {{arch: decoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {{type: rope}}}}
train: {{max_steps: {steps}, batch_size: 4, lr: 0.003, eval_every: {every}, eval_batches: 2,
        checkpoint_every: {every}, log_every: 1, schedule: {{warmup: 2}}}}
""")
