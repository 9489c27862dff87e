print("earmark")
