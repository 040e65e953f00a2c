"""Take a kernel home: export a verified candidate as a PyTorch package (a `torch.library` op and a drop-in
`ModelNew`) or as one file in KernelBench's submission format (`exporter`). Export writes files only: it needs
no GPU and no nvcc; the kernel is built where it runs. The text files beside the code are the templates."""
