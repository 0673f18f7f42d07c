module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 1, dp = 2, pp = 2, sequence_parallel = true>} {}
