"""The official `openai` package against `cohort serve` (driven by tests/cli/serve.rs).

    python3 openai_client.py basic BASE_URL
    python3 openai_client.py concurrent BASE_URL N

Each check asserts; a failure exits non-zero with the assertion and the values involved.
"""

import sys
import threading

import openai

MARKER_PROMPT = "Marker COHORT-{i}. Write one sentence about the sea. Begin your answer with the marker."


def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def basic(base_url):
    c = client(base_url)
    models = c.models.list()
    model = models.data[0].id
    assert len(models.data) == 1 and model, models

    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=12,
        temperature=0,
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content, choice
    assert choice.finish_reason in ("stop", "length"), choice
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 12, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage

    # Streaming, with the usage chunk at the end.
    chunks = list(
        c.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Name a colour."}],
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == choice.message.content, (text, choice.message.content)
    assert len({ch.id for ch in chunks}) == 1, "one id across the stream"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [choice.finish_reason], finishes
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, chunks[-1]

    # Text completions, whole and streamed.
    t = c.completions.create(model=model, prompt="The sea is", max_tokens=6, temperature=0)
    assert t.object == "text_completion" and t.choices[0].text, t
    streamed = "".join(x.choices[0].text for x in c.completions.create(
        model=model, prompt="The sea is", max_tokens=6, temperature=0, stream=True) if x.choices)
    assert streamed == t.choices[0].text, (streamed, t.choices[0].text)

    # Errors: the client raises the matching exception, the message names the field.
    for kwargs, param, words in [
        ({"temperature": -1}, "temperature", "temperature"),
        ({"n": 2}, "n", "one choice"),
        ({"top_p": 0}, "top_p", "top_p"),
        ({"messages": [{"role": "user", "content": "word " * 9000}]}, "messages", "context window"),
        ({"max_tokens": 100000}, "max_tokens", "context window"),
    ]:
        args = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        args.update(kwargs)
        try:
            c.chat.completions.create(**args)
        except openai.BadRequestError as e:
            assert e.status_code == 400, e
            assert words in e.message and e.body.get("param") == param, (kwargs, e.message, e.body)
            if param in ("messages", "max_tokens"):
                # Refused by the engine after it was given an id: the answer keeps that id.
                assert e.response.headers.get("x-request-id", "").startswith("chatcmpl-"), e.response.headers
        else:
            raise AssertionError(f"{kwargs} was accepted")
    # A text completion over the window names its own field, "prompt".
    try:
        c.completions.create(model=model, prompt="word " * 9000, max_tokens=4)
    except openai.BadRequestError as e:
        assert "context window" in e.message and e.body.get("param") == "prompt", (e.message, e.body)
        assert e.response.headers.get("x-request-id", "").startswith("cmpl-"), e.response.headers
    else:
        raise AssertionError("an over-long prompt was accepted")
    # A bad request never disturbs the server: the next one is answered.
    again = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=12, temperature=0)
    assert again.choices[0].message.content == choice.message.content
    print("basic ok")


def concurrent(base_url, n):
    c = client(base_url)
    model = c.models.list().data[0].id
    prompts = [MARKER_PROMPT.format(i=i) for i in range(n)]
    args = {"model": model, "max_tokens": 40, "temperature": 0, "extra_body": {"ignore_eos": True}}
    alone = []
    for p in prompts:
        r = c.chat.completions.create(messages=[{"role": "user", "content": p}], **args)
        alone.append(r.choices[0].message.content)
    results = [None] * n
    errors = []
    start = threading.Barrier(n)

    def stream(i):
        try:
            start.wait()
            chunks = list(c.chat.completions.create(
                messages=[{"role": "user", "content": prompts[i]}], stream=True,
                stream_options={"include_usage": True}, **args))
            results[i] = chunks
        except Exception as e:  # reported below with its index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ids = set()
    widest = 0
    for i, chunks in enumerate(results):
        stream_ids = {ch.id for ch in chunks}
        assert len(stream_ids) == 1, (i, stream_ids)
        ids |= stream_ids
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        # The same greedy answer as when it ran alone: nothing of another row's leaked in.
        assert text == alone[i], (i, text, alone[i])
        assert chunks[-1].usage.completion_tokens == 40, chunks[-1].usage
        widest = max(widest, chunks[-1].model_extra["cohort"]["real_width"])
    assert len(ids) == n, ids
    print(f"concurrent ok: {n} streams, {len(ids)} ids, widest cohort {widest}")


if __name__ == "__main__":
    if sys.argv[1] == "basic":
        basic(sys.argv[2])
    elif sys.argv[1] == "concurrent":
        concurrent(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown check {sys.argv[1]}")
