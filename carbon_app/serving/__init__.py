"""Carbon models run by an inference server (vLLM, SGLang): the client and the model as the engine reads it."""
