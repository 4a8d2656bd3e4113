"""What training needs beside the network: the loss terms, the teacher, callbacks (resume,
last checkpoints), self-contained checkpoints and attachment metrics."""
