"""LLM proposals and RL fine-tuning of the LLM, without Django.

prompt.py     the prompt: problem, GPU facts, the C ABI, the best kernel, top-k earlier ones, the
              last error; repair turns
extract.py    the code out of a model's answer, then the static gate (engine.compilation)
backends.py   OpenAI-compatible chat completions and a local transformers causal LM
proposer.py   LLMProposer (engine.campaign's Proposer interface) and SourceKernel candidates
evaluate.py   static gate → compile → verify → measure → reward, for one source or a campaign
train.py      GRPO (trl) with LoRA (peft) on a local model, rewards from the evaluator chain

Heavy packages (openai, transformers, peft, trl) are imported inside the functions that need
them, so ``import engine.llm`` stays cheap.
"""
