module attributes {tfm.plan = #tfm.plan<order = "tp-tp-cp-dp-pp">} {}
