"""Testing the optimizer itself: differential fuzzing (:mod:`.fuzz`, built from :mod:`.motifs`)."""
