module attributes {tfm.plan = #tfm.plan<tp = 1, dp = 2, ep = 4>} {}
