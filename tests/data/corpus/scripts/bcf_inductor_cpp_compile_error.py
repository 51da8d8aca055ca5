# label: backend_compiler_failed
# subcategory: Inductor C++ codegen emits invalid code for relu -> InductorError: CppCompileError
# runs: 2
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


if __name__ == "__main__":
    model = torch.compile(Model(), backend="inductor")
    model(torch.randn(4, 8))
