module attributes {tfm.plan = #tfm.plan<tp = 0>} {}
