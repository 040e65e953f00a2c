"""What the profile says, in one room: running ncu on a candidate or the PyTorch baseline (`run`,
`baseline_target`), reading its report (`report`), the findings the agents read (`findings`, worded in
`findings.txt`), the state signature (`signature`) and the typed profile an evaluation carries (`outcome`).
`tools.ncu` keeps only the wrapper that starts ncu."""
