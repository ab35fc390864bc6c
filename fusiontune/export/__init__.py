"""fusiontune.export (private; import from fusiontune): graphs and plans written out.

The export side of the front ends: ONNX models (`onnx_export`, `plan_export`) and schedules
(`schedule`). It sits above `sim` (it compiles and costs groups); `frontend` (import) does not
import it.
"""
