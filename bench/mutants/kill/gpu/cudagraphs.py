"""CUDA graphs (mode="reduce-overhead", cudagraph trees) against eager: warm-up, record and replay,
new shapes re-recorded, a mutated input, outputs kept across replays, and a training step with backward."""

import sys

import torch


def check(name, got, want, tol=1e-4):
    try:
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def accumulate(buf, x):
    buf.add_(x * 2)
    return buf.sum(0), x.relu()


def run():
    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.Linear(40, 8)).to(dev)
    ref = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.Linear(40, 8)).to(dev)
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        fast = torch.compile(model, mode="reduce-overhead")
        kept = []
        for step, batch in enumerate((16, 16, 16, 16, 5, 5, 5, 16)):
            torch.compiler.cudagraph_mark_step_begin()
            x = torch.randn(batch, 24, device=dev)
            out = fast(x)
            kept.append((out.clone(), ref(x)))
            check(f"inference step {step} batch {batch}", out, kept[-1][1], tol=1e-3)
        for step, (got, want) in enumerate(kept):
            check(f"kept output {step}", got, want, tol=1e-3)
    mutate = torch.compile(accumulate, mode="reduce-overhead")
    buf, buf_ref = torch.zeros(9, 13, device=dev), torch.zeros(9, 13, device=dev)
    for step in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(9, 13, device=dev)
        got = tuple(t.clone() for t in mutate(buf, x))
        check(f"mutated input step {step}", (got, buf), (accumulate(buf_ref, x), buf_ref))
    train = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(12, 24, device=dev)
        loss = train(x).square().mean()
        loss_ref = ref(x).square().mean()
        check(f"train loss {step}", loss.detach().clone(), loss_ref.detach(), tol=1e-3)
        loss.backward()
        loss_ref.backward()
        check(f"train grads {step}", [p.grad for p in model.parameters()], [p.grad for p in ref.parameters()],
              tol=1e-3)
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()


if __name__ == "__main__":
    run()
