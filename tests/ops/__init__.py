"""Operations on live processes: crashes, faults, replicas, workers, fairness, deadlines, logs."""
