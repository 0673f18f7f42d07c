module attributes {tfm.plan = #tfm.plan<pp = -2>} {}
